"""``leap serve`` locked down: tokens from a file (several at once, rotated without a restart),
TLS, no unauthenticated listener off loopback unless asked, and the admission webhook on a
listener of its own (https, no token, its own threads) that ranks a Job by its pod template.
In process through ``httpx.ASGITransport``, then once as a real ``leap serve`` over TLS."""

import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import logging
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import jsonpatch
import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from http_model import TOKEN, _free_port, launch_body, registered_model

from leap_serving.decide.results import Ranking
from leap_serving.handoff.config import GPU_PRODUCTS
from leap_serving.handoff.kubernetes import OPT_IN_LABEL
from leap_serving.http.app import create_app
from leap_serving.http.config import ServeConfig, config_from_environment, is_loopback
from leap_serving.http.tokens import Tokens, read_token_file
from leap_serving.http.webhook import MUTATE_PATH, create_webhook_app

PROJECT = Path(__file__).resolve().parents[1]
LEAP = str(Path(sys.executable).parent / "leap")
K8S_VERSION = kubernetes_validate.utils.latest_version()
# types the default Kubernetes map labels, so a ranking of them always makes an affinity
MAPPED = ["A100-80GB", "H100-SXM", "L40S", "A10G", "L4", "T4"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with registered_model(tmp_path_factory.mktemp("http-security")) as model:
        yield model


def _call(app, method: str, path: str, **kwargs) -> httpx.Response:
    async def go():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://leap") as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


# --- binding off loopback ---


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True), ("[::1]", True),
     ("localhost", True), ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False),
     ("", False), ("10.1.2.3", False), ("192.168.0.7", False), ("leap.example.com", False),
     ("localhost.example.com", False)],
)  # fmt: skip
def test_only_loopback_addresses_count_as_loopback(host, loopback):
    assert is_loopback(host) is loopback
    if loopback:
        assert ServeConfig(host=host).host == host
    else:
        with pytest.raises(ValueError, match="not a loopback address") as refused:
            ServeConfig(host=host)
        assert repr(host) in str(refused.value) and "--allow-unauthenticated" in str(refused.value)
        # a token, or saying so out loud, lets it start
        assert ServeConfig(host=host, token="t").authenticated
        assert ServeConfig(host=host, allow_unauthenticated=True).exposed_without_token


def test_leap_serve_refuses_0_0_0_0_without_a_token_naming_the_host_and_the_fix(tmp_path):
    """The command, as a user runs it: exit 2 before any model loads, the host and the two
    fixes named; ``python -m leap_serving.http`` the same."""
    env = {**os.environ, "LEAP_SERVE_TOKEN": "", "LEAP_SERVE_TOKEN_FILE": "",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/none.db"}  # fmt: skip
    for command in ([LEAP, "serve"], [sys.executable, "-m", "leap_serving.http"]):
        done = subprocess.run([*command, "--host", "0.0.0.0", "--port", str(_free_port())],
                              env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2, (done.stdout, done.stderr[-2000:])
        for named in ("'0.0.0.0'", "LEAP_SERVE_TOKEN_FILE", "--token-file",
                      "--allow-unauthenticated"):  # fmt: skip
            assert named in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr


def test_no_flag_takes_a_token_on_the_command_line():
    """A secret on argv is readable by every user of the host (``ps``)."""
    done = subprocess.run([LEAP, "serve", "--help"], capture_output=True, text=True, timeout=120)
    assert "--token-file" in done.stdout and "--allow-unauthenticated" in done.stdout
    assert "--token " not in done.stdout and "--token=" not in done.stdout


# --- tokens from a file ---


def _write_tokens(path: Path, *lines: str) -> None:
    """Write beside, then rename over: how a rotation (and a Kubernetes Secret volume)
    replaces the file, never half-written."""
    staged = path.with_suffix(".new")
    staged.write_text("".join(line + "\n" for line in lines))
    staged.chmod(0o600)  # a token file others can read is refused
    os.replace(staged, path)


def test_a_token_file_accepts_each_of_its_tokens_and_a_rewrite_rotates_them(served, tmp_path):
    path = tmp_path / "tokens"
    _write_tokens(path, "# rotated 2026-12-01", "", "  first-token-aaaa  ", "second-token-bbb")
    app = create_app(served["ranker"], ServeConfig(token_file=str(path)))
    body = launch_body(served)

    def status(token: str | None) -> int:
        headers = _bearer(token) if token is not None else {}
        return _call(app, "POST", "/v1/rank", json=body, headers=headers).status_code

    assert status("first-token-aaaa") == status("second-token-bbb") == 200
    for wrong in (None, "third-token-ccc", "first-token-aaa", "first-token-aaaa-", "# rotated"):
        assert status(wrong) == 401, wrong
    # rotation: the new token added, the first dropped; no restart
    _write_tokens(path, "second-token-bbb", "third-token-ccc")
    assert status("third-token-ccc") == status("second-token-bbb") == 200
    assert status("first-token-aaaa") == 401
    # the probes still ask for none
    assert _call(app, "GET", "/readyz").status_code == 200


def test_a_token_file_that_turns_bad_fails_closed_and_the_static_token_still_works(
    served, tmp_path, caplog
):
    path = tmp_path / "tokens"
    _write_tokens(path, "file-token-1234")
    app = create_app(served["ranker"], ServeConfig(token=TOKEN, token_file=str(path)))
    body = launch_body(served)

    def status(token: str) -> int:
        return _call(app, "POST", "/v1/rank", json=body, headers=_bearer(token)).status_code

    assert status("file-token-1234") == status(TOKEN) == 200  # both sources at once
    with caplog.at_level(logging.ERROR, logger="leap_serving"):
        _write_tokens(path, "# every token revoked")
        assert status("file-token-1234") == 401 and status(TOKEN) == 200
        path.unlink()
        assert status("file-token-1234") == 401 and status(TOKEN) == 200
    assert any("holds no token" in r.getMessage() for r in caplog.records)
    assert not any("file-token-1234" in r.getMessage() for r in caplog.records)
    _write_tokens(path, "file-token-5678")  # good again: read again
    assert status("file-token-5678") == 200 and status("file-token-1234") == 401


@pytest.mark.parametrize(
    ("text", "match"),
    [("", "holds no token"), ("# only a comment\n\n", "holds no token"),
     ("good-token\ntwo words\n", "line 2 is not a token"),
     ("good-token\nbell\x07\n", "line 2 is not a token")],
)  # fmt: skip
def test_a_bad_token_file_stops_the_start_naming_the_file_and_line_never_the_token(
    tmp_path, text, match
):
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(ValueError, match=match) as refused:
        Tokens(path=str(path))
    assert "LEAP_SERVE_TOKEN_FILE" in str(refused.value) and str(path) in str(refused.value)
    assert "words" not in str(refused.value) and "good-token" not in str(refused.value)
    with pytest.raises(ValueError, match="cannot read it"):
        read_token_file(str(tmp_path / "missing"))


def test_the_token_settings_are_read_from_the_environment(tmp_path):
    path = tmp_path / "tokens"
    config = config_from_environment(
        {"LEAP_SERVE_TOKEN_FILE": str(path), "LEAP_SERVE_HOST": "0.0.0.0",
         "LEAP_SERVE_WEBHOOK_PORT": "8443", "LEAP_SERVE_TLS_CERT": "c.pem",
         "LEAP_SERVE_TLS_KEY": "k.pem", "LEAP_SERVE_WEBHOOK_HOST": "10.0.0.1"}
    )  # fmt: skip
    assert (config.token_file, config.host, config.webhook_port, config.webhook_host) == (
        str(path), "0.0.0.0", 8443, "10.0.0.1",
    )  # fmt: skip
    with pytest.raises(ValueError, match="LEAP_SERVE_WEBHOOK_PORT='https' is not a int"):
        config_from_environment({"LEAP_SERVE_WEBHOOK_PORT": "https"})


# --- TLS ---


def make_tls(folder: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate it signed for 127.0.0.1 and localhost (what the
    TLS tests trust and serve), and an unrelated key."""
    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("leap test CA"))
        .issuer_name(name("leap test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("leap-webhook.leap.svc"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    plain = serialization.NoEncryption()
    pkcs8 = serialization.PrivateFormat.PKCS8
    paths = {n: folder / f"{n}.pem" for n in ("ca", "cert", "key", "other_key")}
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    paths["key"].write_bytes(key.private_bytes(pem, pkcs8, plain))
    other = ec.generate_private_key(ec.SECP256R1())
    paths["other_key"].write_bytes(other.private_bytes(pem, pkcs8, plain))
    paths["key"].chmod(0o600)
    return paths


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def test_a_tls_file_that_is_missing_unreadable_or_not_the_pair_is_named_at_start(tls, tmp_path):
    missing = str(tmp_path / "nope.pem")
    cases = [
        (ServeConfig(tls_cert=missing, tls_key=str(tls["key"])), "LEAP_SERVE_TLS_CERT", missing),
        (ServeConfig(tls_cert=str(tls["cert"]), tls_key=missing), "LEAP_SERVE_TLS_KEY", missing),
        (ServeConfig(tls_cert=str(tls["cert"]), tls_key=str(tls["other_key"])),
         "LEAP_SERVE_TLS_KEY", str(tls["other_key"])),
        (ServeConfig(tls_cert=str(tls["key"]), tls_key=str(tls["key"])),
         "LEAP_SERVE_TLS_CERT", str(tls["key"])),
    ]  # fmt: skip
    for config, setting, path in cases:
        with pytest.raises(ValueError) as refused:
            config.check_files()
        assert setting in str(refused.value) and repr(path) in str(refused.value), refused.value
    ServeConfig(tls_cert=str(tls["cert"]), tls_key=str(tls["key"])).check_files()
    with pytest.raises(ValueError, match="LEAP_SERVE_TLS_CERT is set but LEAP_SERVE_TLS_KEY"):
        ServeConfig(tls_cert=str(tls["cert"]))


def test_a_webhook_port_needs_tls_and_a_port_of_its_own(tls):
    with pytest.raises(ValueError, match="needs TLS: the kube-apiserver calls webhooks over https"):
        ServeConfig(webhook_port=8443)
    with pytest.raises(ValueError, match="listener of its own"):
        ServeConfig(port=8443, webhook_port=8443, tls_cert="c", tls_key="k")
    # the webhook's listener is meant to be reached from off the host, without a token
    assert ServeConfig(webhook_port=8443, webhook_host="0.0.0.0", tls_cert="c", tls_key="k")


# --- the admission webhook ---


def job_review(served, *, on_template: bool = True) -> tuple[dict, dict]:
    """An AdmissionReview of a batch/v1 Job labelled to opt in, its launch on its pod
    template's annotations only (``on_template``) or on its own."""
    launch = {**served["launches"][0]["job"], "ds": served["launch_date"]}
    annotations = {"leap.dev/launch": json.dumps(launch), "leap.dev/candidates": ",".join(MAPPED)}
    template = {
        "metadata": {"labels": {OPT_IN_LABEL: "true", "app": "train"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "train", "image": "python:3.11", "command": ["python"]}],
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml", "labels": {OPT_IN_LABEL: "true"}},
        "spec": {"backoffLimit": 0, "template": template},
    }
    (template if on_template else job)["metadata"]["annotations"] = annotations
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0b9e6f51-5c1a-4c1e-9d0f-3a7c2f5f7e11",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "operation": "CREATE",
            "namespace": "ml",
            "object": job,
            "userInfo": {"username": "alice"},
            "dryRun": False,
        },
    }
    return job, review


def check_ranked_job(served, job: dict, answer: dict) -> dict:
    """The patch applied to ``job``: a valid Job whose template requires the model's own top
    three and whose pods carry the ranking (so they pass the webhook untouched)."""
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview" and response["allowed"] is True, answer
    assert response["uid"] == "0b9e6f51-5c1a-4c1e-9d0f-3a7c2f5f7e11"
    assert response["patchType"] == "JSONPatch" and "warnings" not in response, response
    result = jsonpatch.apply_patch(job, json.loads(base64.b64decode(response["patch"])))
    kubernetes_validate.validate(result, K8S_VERSION, strict=True)
    launch = json.loads(
        (job["spec"]["template"]["metadata"].get("annotations") or job["metadata"]["annotations"])[
            "leap.dev/launch"
        ]
    )
    expected = served["ranker"].rank(launch, MAPPED).preference_list
    assert len(expected) >= 3
    (term,) = result["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    assert term["matchExpressions"][0]["values"] == [GPU_PRODUCTS[t] for t in expected[:3]]
    for where in (result["metadata"], result["spec"]["template"]["metadata"]):
        assert where["annotations"]["leap.dev/ranking"] == ",".join(expected)
    return result


def test_the_webhook_ranks_a_job_by_its_pod_template_and_by_its_own_annotations(served):
    app = create_webhook_app(served["ranker"])
    for on_template in (True, False):
        job, review = job_review(served, on_template=on_template)
        answer = _call(app, "POST", MUTATE_PATH, json=review)
        assert answer.status_code == 200, answer.text
        check_ranked_job(served, job, answer.json())
    # a Job that opted in by label but carries no launch anywhere: allowed, with a warning
    job, review = job_review(served)
    del job["spec"]["template"]["metadata"]["annotations"]
    response = _call(app, "POST", MUTATE_PATH, json=review).json()["response"]
    assert "patch" not in response and "nor on its pod template" in response["warnings"][0]


def test_the_webhook_listener_has_only_its_route_asks_no_token_and_counts_in_metrics(served):
    main = create_app(served["ranker"], ServeConfig(token=TOKEN))
    webhook = create_webhook_app(served["ranker"], ServeConfig(token=TOKEN), metrics=main.metrics)
    _, review = job_review(served)
    assert _call(webhook, "POST", MUTATE_PATH, json=review).status_code == 200  # no token
    assert _call(webhook, "GET", "/healthz").status_code == 200
    for method, path in (("POST", "/v1/rank"), ("GET", "/metrics"), ("GET", "/v1/model")):
        assert _call(webhook, method, path, json={}).status_code == 404, path
    text = _call(main, "GET", "/metrics", headers=_bearer(TOKEN)).text
    assert 'leap_serve_requests_total{route="/v1/k8s/mutate",status="200"} 1.0' in text


def test_pod_creates_never_queue_behind_rankings_on_the_main_port(served, monkeypatch):
    """Every /v1/rank thread held: the webhook still answers with a real ranking, from its own
    threads; the held rankings then finish."""
    config = ServeConfig(deadline_s=60)
    main = create_app(served["ranker"], config)
    webhook = create_webhook_app(served["ranker"], config, metrics=main.metrics)
    inside, release = threading.Semaphore(0), threading.Event()
    real_rank_one = main.pool.rank_one

    def held(launch):
        inside.release()
        release.wait(60)
        return real_rank_one(launch)

    monkeypatch.setattr(main.pool, "rank_one", held)
    job, review = job_review(served)

    async def scenario():
        main_client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=main), base_url="http://m"
        )
        hook_client = httpx.AsyncClient(transport=httpx.ASGITransport(app=webhook),
                                        base_url="http://w")  # fmt: skip
        async with main_client, hook_client:
            body = launch_body(served)
            held_calls = [asyncio.create_task(main_client.post("/v1/rank", json=body))
                          for _ in range(config.ranking_threads + 1)]  # fmt: skip
            for _ in range(config.ranking_threads):  # every main thread is inside a ranking
                assert await asyncio.to_thread(inside.acquire, True, 30)
            try:
                hooked = await hook_client.post(MUTATE_PATH, json=review)
                still_held = [not t.done() for t in held_calls]
            finally:
                release.set()
            return hooked, still_held, await asyncio.gather(*held_calls)

    hooked, still_held, held_answers = asyncio.run(scenario())
    assert all(still_held)  # the webhook answered while /v1/rank's threads were all taken
    check_ranked_job(served, job, hooked.json())
    assert [a.status_code for a in held_answers] == [200] * (config.ranking_threads + 1)


class _StuckRanker:
    model_version, model_uri, hardware_types = "9", "models:/stuck@production", MAPPED

    def __init__(self):
        self.release = threading.Event()

    def wait_ready(self, timeout=None):
        return True

    def rank(self, job, candidates, **kwargs):
        self.release.wait(30)
        return Ranking([], model_version="9", reason="late", reason_code="internal_error")


def test_a_late_ranking_admits_the_object_unchanged_with_a_warning_not_a_504(served):
    """A 504 would be the webhook failing, left to failurePolicy; the object is admitted
    unranked either way, and this way the user reads why."""
    ranker = _StuckRanker()
    app = create_webhook_app(ranker, ServeConfig(deadline_s=0.2))
    _, review = job_review(served)
    try:
        answer = _call(app, "POST", MUTATE_PATH, json=review)
    finally:
        ranker.release.set()
    assert answer.status_code == 200, answer.text
    response = answer.json()["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response["uid"] == review["request"]["uid"] and "deadline" in response["warnings"][0]


# --- the example MutatingWebhookConfiguration ---


def test_the_example_webhook_configuration_is_valid_and_filters_by_the_label():
    path = PROJECT / "examples" / "mutating-webhook.yaml"
    (config,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    kubernetes_validate.validate(config, K8S_VERSION, strict=True)
    assert config["apiVersion"] == "admissionregistration.k8s.io/v1"
    assert config["kind"] == "MutatingWebhookConfiguration"
    (hook,) = config["webhooks"]
    assert hook["objectSelector"] == {"matchLabels": {OPT_IN_LABEL: "true"}}
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] <= 5
    assert hook["clientConfig"]["service"]["path"] == MUTATE_PATH
    assert "caBundle" in hook["clientConfig"]
    rules = {(g, r) for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == {("", "pods"), ("batch", "jobs")}
    assert all(rule["operations"] == ["CREATE"] for rule in hook["rules"])
    # and kubernetes-validate is not a rubber stamp: a misspelt field or a wrong type is refused
    for broken in ({**hook, "objectSelectors": hook["objectSelector"]},
                   {**hook, "timeoutSeconds": "5s"}):  # fmt: skip
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate({**config, "webhooks": [broken]}, K8S_VERSION, strict=True)


# --- a real leap serve: two listeners, TLS ---


@contextlib.contextmanager
def serving_tls(served, tmp_path, tls, *extra: str, env: dict | None = None):
    """``leap serve`` over TLS with its webhook listener, on free loopback ports, ready; yields
    (main URL, webhook URL, an SSL context trusting the test CA, the process)."""
    port, webhook_port = _free_port(), _free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": served["tracking"], "LEAP_SERVE_TOKEN": "",
           **(env or {})}  # fmt: skip
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [LEAP, "serve", "--model", served["uri"], "--port", str(port), "--webhook-port",
         str(webhook_port), "--tls-cert", str(tls["cert"]), "--tls-key", str(tls["key"]), *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    trust = ssl.create_default_context(cafile=str(tls["ca"]))
    base, hook = f"https://127.0.0.1:{port}", f"https://127.0.0.1:{webhook_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                ready = httpx.get(f"{base}/readyz", verify=trust, timeout=2).status_code == 200
                if ready and httpx.get(f"{hook}/healthz", verify=trust, timeout=2).is_success:
                    break
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()[-3000:]
            time.sleep(0.3)
        yield base, hook, trust, server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(10)
        log.close()


def test_leap_serve_answers_the_webhook_over_tls_without_a_token_and_guards_rank(
    served, tmp_path, tls
):
    tokens = tmp_path / "tokens"
    _write_tokens(tokens, "# leap serve's callers", "rank-token-0001", "rank-token-0002")
    job, review = job_review(served)
    with serving_tls(served, tmp_path, tls, "--token-file", str(tokens)) as (
        base, hook, trust, server,
    ):  # fmt: skip
        # the webhook: https, no token, a Job ranked by its template
        answer = httpx.post(f"{hook}{MUTATE_PATH}", json=review, verify=trust, timeout=30)
        assert answer.status_code == 200, answer.text
        check_ranked_job(served, job, answer.json())
        # only the webhook's routes on its port, and no plain http
        assert httpx.post(f"{hook}/v1/rank", json={}, verify=trust, timeout=30).status_code == 404
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"http{hook[5:]}{MUTATE_PATH}", json=review, timeout=30)
        # the main port: https too, and still the token's
        body = launch_body(served)
        refused = httpx.post(f"{base}/v1/rank", json=body, verify=trust, timeout=30)
        assert refused.status_code == 401
        for token in ("rank-token-0001", "rank-token-0002"):
            ranked = httpx.post(f"{base}/v1/rank", json=body, headers=_bearer(token),
                                verify=trust, timeout=30)  # fmt: skip
            assert ranked.status_code == 200 and ranked.json()["ranking"], ranked.text
        # an untrusted certificate is refused by a client that checks
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{hook}/healthz", verify=ssl.create_default_context(), timeout=30)
        os.killpg(server.pid, signal.SIGTERM)
        assert server.wait(30) == 0  # one SIGTERM stops both listeners
    log = (tmp_path / "serve.log").read_text()
    assert "admission webhook on https://" in log and "rank-token-000" not in log


def test_leap_serve_off_loopback_with_the_flag_warns_loudly(served, tmp_path, tls):
    with serving_tls(served, tmp_path, tls, "--host", "0.0.0.0", "--allow-unauthenticated"):
        pass
    log = (tmp_path / "serve.log").read_text()
    assert "WITHOUT A TOKEN" in log and "0.0.0.0" in log and "WARNING" in log
