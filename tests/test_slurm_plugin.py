"""``examples/job_submit.lua``, Slurm's job_submit plugin, run in Lua (lupa) against a stand-in
curl on PATH: it sets the job's constraint from the ranking, never reads a path a user names
(slurmctld would read any file for them), and never puts the token on curl's command line."""

import json
import os
import stat
from pathlib import Path

import pytest

# LuaJIT (Lua 5.1, as old a Lua as slurmctld links): lupa's builds of PUC Lua lack io.popen
lupa = pytest.importorskip("lupa.luajit21") if not os.environ.get("LEAP_CI") else None
if lupa is None:  # in CI the plugin's test must run, never skip (lupa is in the dev extra)
    import lupa.luajit21 as lupa

PLUGIN = Path(__file__).resolve().parents[1] / "examples" / "job_submit.lua"
TOKEN = "s3cret-token-for-the-test"
ANSWER = {"ranking": [{"hardware_type": "H100-SXM"}, {"hardware_type": "L4"},
                      {"hardware_type": "NO-FEATURE"}, {"hardware_type": "A100-80GB"}],
          "removed": []}  # fmt: skip


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """The plugin loaded in a Lua runtime, its token file in ``tmp_path``, and a curl that
    records its argv, the files it was handed (``@path``) and their modes, then answers."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    curl.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        "files = {a[1:]: (open(a[1:]).read(), oct(os.stat(a[1:]).st_mode & 0o777))\n"
        "         for a in sys.argv[1:] if a.startswith('@')}\n"
        f"record = json.dumps({{'argv': sys.argv, 'files': files}})\n"
        f"open({str(calls)!r}, 'a').write(record + '\\n')\n"
        f"print({json.dumps(json.dumps(ANSWER))})\n"
    )
    curl.chmod(curl.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    token_file = tmp_path / "leap.token"
    token_file.write_text(TOKEN + "\n")
    source = PLUGIN.read_text().replace('"/etc/slurm/leap.token"', json.dumps(str(token_file)))
    runtime = lupa.LuaRuntime()
    logged = []
    runtime.globals().slurm = runtime.table_from(
        {"SUCCESS": 0, "log_info": lambda fmt, *args: logged.append(str(fmt))}
    )
    runtime.execute(source)

    def submit(environment: dict, features: str | None = None):
        job = runtime.table_from({"environment": runtime.table_from(environment)})
        if features is not None:
            job.features = features
        code = runtime.globals().slurm_job_submit(job, None, 1000)
        return code, job

    def made() -> list[dict]:
        return (
            [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []
        )

    return submit, made, logged


def test_a_launch_gets_the_ranked_types_constraint_and_the_token_stays_off_argv(plugin):
    submit, made, _ = plugin
    launch = {"model_type": "bert", "batch_size": 32}
    code, job = submit({"LEAP_LAUNCH": json.dumps(launch)})
    assert code == 0 and job.features == "h100-sxm|l4|a100-80gb" and job.prefer == "h100-sxm"
    (call,) = made()
    assert not any(TOKEN in arg for arg in call["argv"])  # ps would show it
    headers = [text for text, _ in call["files"].values() if text.startswith("Authorization")]
    assert headers == [f"Authorization: Bearer {TOKEN}\n"]
    assert all(mode == "0o600" for _, mode in call["files"].values())
    bodies = [json.loads(text) for text, _ in call["files"].values() if text.startswith("{")]
    assert bodies[0]["job"] == launch
    assert not any(Path(path).exists() for path in call["files"])  # removed after the call


def test_a_path_in_leap_launch_is_never_read_nor_sent(plugin, tmp_path):
    submit, made, logged = plugin
    secret = tmp_path / "controller-key"
    secret.write_text("{ a file only slurmctld can read }")
    code, job = submit({"LEAP_LAUNCH": str(secret)})
    assert code == 0 and job.features is None and made() == []
    assert any("is not a JSON object" in line for line in logged)
    code, job = submit({"LEAP_LAUNCH": "{" + " " * 70_000 + "}"})  # past MAX_LAUNCH_BYTES
    assert job.features is None and made() == []


def test_a_job_with_its_own_constraint_or_no_launch_is_left_alone(plugin):
    submit, made, _ = plugin
    _, job = submit({"LEAP_LAUNCH": '{"model_type": "bert"}'}, features="mine")
    assert job.features == "mine"
    _, job = submit({})
    assert job.features is None and made() == []


def test_a_server_that_does_not_answer_is_not_asked_again_for_a_while(plugin, tmp_path):
    """slurmctld holds its locks while the plugin waits on curl: a leap serve that is down
    cost every submission the whole timeout. After one call with no answer the plugin leaves
    jobs as submitted without calling, for BACKOFF_S."""
    submit, made, logged = plugin
    curl = tmp_path / "bin" / "curl"
    curl.write_text(
        "#!/usr/bin/env python3\n"
        "import sys\n"
        f"open({str(tmp_path / 'calls.jsonl')!r}, 'a').write('{{\"argv\": []}}\\n')\n"
        "sys.exit(28)\n"  # curl's timeout
    )
    launch = {"LEAP_LAUNCH": json.dumps({"model_type": "bert", "batch_size": 32})}
    code, job = submit(launch)
    assert code == 0 and job.features is None and len(made()) == 1
    assert any("not asked again for" in line for line in logged)
    for _ in range(5):
        code, job = submit(launch)
        assert code == 0 and job.features is None
    assert len(made()) == 1  # the later submissions never waited on curl
