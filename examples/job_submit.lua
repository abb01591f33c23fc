--[[
job_submit.lua: Slurm's job_submit/lua plugin asks `leap serve` for a ranking at submission and
sets the job's --constraint (the best TOP_K types' node features, ORed) and --prefer (the best
one), as `leap rank --format slurm` prints them (leap_serving/handoff/slurm.py).

Install: JobSubmitPlugins=lua in slurm.conf, this file beside slurm.conf, `scontrol reconfigure`.
Slurm 22.05 or later (the `prefer` field). slurmctld runs it holding its locks, so the call has
a short timeout (1 s, 0.3 s to connect), any failure leaves the job as submitted, and after a
call that got no answer leap serve is not asked again for BACKOFF_S (60 s): a server that is
down costs one submission a minute a second, not every one.

A job opts in with the launch config itself, as JSON, in its environment:
  LEAP_LAUNCH="$(cat job.json)" sbatch train.sh
  LEAP_CANDIDATES=A100-80GB,H100-SXM                         (optional; default: FEATURES' types)
A job that sets --constraint itself, or has no LEAP_LAUNCH, is left alone. LEAP_LAUNCH is never
read as a path: slurmctld runs as SlurmUser, and a path a user names would have the controller
read, and send on, any file it can read (its keys included). A launch over MAX_LAUNCH_BYTES is
left as submitted.

The token never appears on a command line (where `ps` shows it to every user of the host): it
reaches curl in a header file readable by slurmctld's user only, which is removed after the call.
]]

-- https: the bearer token never crosses the network in clear text (leap serve --tls-cert)
local LEAP_URL = "https://leap.internal:8765/v1/rank"
local CA_FILE = nil  -- the CA that signed leap serve's certificate, when not the system's
local TOKEN_FILE = "/etc/slurm/leap.token"  -- the bearer token, when leap serve requires one
local TIMEOUT_S = 1  -- the whole call; slurmctld holds its locks meanwhile
local CONNECT_TIMEOUT_S = 0.3
-- after a call that got no answer, submissions skip leap serve this long: a server that is down
-- must not cost every sbatch TIMEOUT_S under slurmctld's locks
local BACKOFF_S = 60
local skip_until = 0
local MAX_LAUNCH_BYTES = 65536  -- a launch is a few hundred bytes
local TOP_K = 3
-- hardware type (the fleet's name) -> the node feature slurm.conf gives those nodes
local FEATURES = {
  ["A100-80GB"] = "a100-80gb",
  ["H100-SXM"] = "h100-sxm",
  ["H200"] = "h200",
  ["L40S"] = "l40s",
  ["L4"] = "l4",
}

local function shell_quote(text)
  return "'" .. string.gsub(text, "'", "'\\''") .. "'"
end

local function read_file(path)
  local f = io.open(path, "r")
  if f == nil then return nil end
  local text = f:read("*a")
  f:close()
  return text
end

local function json_string(text)
  return '"' .. string.gsub(text, '[%c"\\]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end) .. '"'
end

-- the request body: {"job": <launch>, "candidates": [...]}
local function body(launch, candidates)
  local quoted = {}
  for _, name in ipairs(candidates) do table.insert(quoted, json_string(name)) end
  return '{"job": ' .. launch .. ', "candidates": [' .. table.concat(quoted, ", ") .. "]}"
end

-- the ranking's hardware types best first, from Ranking.to_dict()'s JSON
local function ranked_types(answer)
  local from = string.find(answer, '"ranking"%s*:%s*%[')
  if from == nil then return {} end
  local to = string.find(answer, '"removed"%s*:', from) or #answer
  local types = {}
  for name in string.gmatch(string.sub(answer, from, to), '"hardware_type"%s*:%s*"([^"]+)"') do
    table.insert(types, name)
  end
  return types
end

local function write_private(text)
  -- os.tmpname creates the file (mkstemp: mode 0600) before it is opened here
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local function ask_leap(request)
  local body_path = write_private(request)
  local header_path = nil
  local token = read_file(TOKEN_FILE)
  local auth = ""
  if token ~= nil then
    -- curl reads "-H @file" headers from the file: the token stays off curl's argv
    header_path = write_private("Authorization: Bearer " .. string.gsub(token, "%s", "") .. "\n")
    auth = "-H @" .. shell_quote(header_path) .. " "
  end
  local ca = ""
  if CA_FILE ~= nil then ca = "--cacert " .. shell_quote(CA_FILE) .. " " end
  local pipe = io.popen("curl -sS -m " .. TIMEOUT_S .. " --connect-timeout " ..
    CONNECT_TIMEOUT_S .. " -X POST " .. ca .. auth ..
    "-H 'Content-Type: application/json' --data-binary @" .. shell_quote(body_path) .. " " ..
    shell_quote(LEAP_URL) .. " 2>/dev/null")
  local answer = pipe:read("*a")
  pipe:close()
  os.remove(body_path)
  if header_path ~= nil then os.remove(header_path) end
  return answer
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  if job_desc.features ~= nil and job_desc.features ~= "" then
    return slurm.SUCCESS  -- the user's own constraint stands
  end
  local env = job_desc.environment or {}
  local launch = env["LEAP_LAUNCH"]
  if launch == nil or launch == "" then return slurm.SUCCESS end
  if string.sub(launch, 1, 1) ~= "{" or #launch > MAX_LAUNCH_BYTES then
    -- never read as a path: the controller would read any file a user names
    slurm.log_info("leap: LEAP_LAUNCH is not a JSON object of at most %d bytes; job left as "
      .. "submitted", MAX_LAUNCH_BYTES)
    return slurm.SUCCESS
  end
  local candidates = {}
  if env["LEAP_CANDIDATES"] ~= nil then
    for name in string.gmatch(env["LEAP_CANDIDATES"], "[^,%s]+") do
      table.insert(candidates, name)
    end
  else
    for name, _ in pairs(FEATURES) do table.insert(candidates, name) end
    table.sort(candidates)
  end
  if os.time() < skip_until then
    return slurm.SUCCESS  -- leap serve failed within BACKOFF_S: not asked, job as submitted
  end
  local ok, answer = pcall(ask_leap, body(launch, candidates))
  if not ok or answer == nil or answer == "" then
    skip_until = os.time() + BACKOFF_S
    slurm.log_info("leap: no answer (%s); job left as submitted, and leap serve is not asked "
      .. "again for %d s", ok and "timed out or refused" or tostring(answer), BACKOFF_S)
    return slurm.SUCCESS
  end
  local features = {}
  for _, name in ipairs(ranked_types(answer)) do
    if FEATURES[name] ~= nil and #features < TOP_K then table.insert(features, FEATURES[name]) end
  end
  if #features == 0 then
    slurm.log_info("leap: no ranked type has a feature; job left as submitted")
    return slurm.SUCCESS
  end
  job_desc.features = table.concat(features, "|")
  job_desc.prefer = features[1]
  slurm.log_info("leap: constraint %s, prefer %s", job_desc.features, job_desc.prefer)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
