-- Shared prelude, prepended to every cascadebreaker script.
-- KEYS[1] = breaker hash; ARGV[1] = breaker name, ARGV[2] = namespace channel, ARGV[3] = key TTL ms.
-- Times are Redis server milliseconds (TIME), so hosts with skewed clocks agree.
if redis.replicate_commands then redis.replicate_commands() end
local KEY, NAME, CHANNEL, TTL = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local T = redis.call('TIME')
local NOW = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000)

local function num(x) return string.format('%.0f', x) end

-- Fields of the hash; a hash written by an older version lacks some: they read as 0 or ''.
local FIELDS = {'state', 'mode', 'version', 'open_until', 'opens', 'reason', 'fails', 'probes',
  'probe_ok', 'half_since', 'lease_until', 'issued', 'reclaimed', 'p_calls', 'p_fail', 'p_slow',
  'detail', 'failure', 'run_by'}
local TEXT = {state = true, mode = true, reason = true, detail = true, failure = true,
  run_by = true}

local function load()
  local f = redis.call('HMGET', KEY, unpack(FIELDS))
  if not f[1] then
    -- A new (or lost) breaker starts at server-time-based version, so it outranks any version a
    -- process remembers from before Redis lost its data.
    local s = {state = 'CLOSED', mode = 'NORMAL', version = NOW, fresh = true, dirty = true}
    for _, name in ipairs(FIELDS) do
      if s[name] == nil then s[name] = TEXT[name] and '' or 0 end
    end
    s.ticket = 0
    return s
  end
  local s = {fresh = false, dirty = false, ticket = 0}
  for i, name in ipairs(FIELDS) do
    if TEXT[name] then s[name] = f[i] or '' else s[name] = tonumber(f[i]) or 0 end
  end
  return s
end

local function move(s, to, why, detail)
  s.version = s.version + 1
  s.state = to
  s.reason = why
  s.detail = detail or ''
  s.dirty = true
  s.changed = true
end

local function start_round(s)
  s.probes, s.probe_ok, s.issued, s.reclaimed = 0, 0, 0, 0
  s.p_calls, s.p_fail, s.p_slow, s.lease_until = 0, 0, 0, 0
end

local function open(s, wait_ms, why, detail)
  s.opens = s.opens + 1
  s.open_until = NOW + wait_ms
  s.fails, s.run_by = 0, ''
  start_round(s)
  move(s, 'OPEN', why, detail)
end

local function close(s, why, detail)
  s.opens, s.fails, s.run_by = 0, 0, ''
  start_round(s)
  move(s, 'CLOSED', why, detail)
end

local function half_open(s)
  s.half_since = NOW
  start_round(s)
  move(s, 'HALF_OPEN', 'open_wait_over')
end

-- Is the closed round of `s` the one a process saw as version `seen`? Either the same version,
-- or the close that ended half-open round `seen`: a process's view can only be CLOSED at a
-- half-open version when its own probe closed it, before the reply (version + 1) came back.
local function same_closed_round(s, seen)
  return s.version == seen or (s.version == seen + 1 and s.reason == 'probes_succeeded')
end

local function remaining(s)
  if s.state == 'OPEN' then return math.max(0, s.open_until - NOW) end
  return 0
end

local function save(s)
  local args = {}
  for _, name in ipairs(FIELDS) do
    args[#args + 1] = name
    args[#args + 1] = TEXT[name] and s[name] or num(s[name])
  end
  redis.call('HSET', KEY, unpack(args))
  redis.call('PEXPIRE', KEY, TTL + remaining(s))  -- never expire an open circuit early
end

-- Save if needed, publish a state change, and answer with the state the caller adopts:
-- {admission, state, mode, version, remaining_ms, opens, reason, fails, lease_remaining_ms, fresh,
--  ticket, probes, detail, failure}
local function finish(s, admission)
  if s.dirty then save(s) end
  -- A change, or a key (re)created (expired, or lost by Redis): the fleet adopts its version.
  if s.changed or (s.fresh and s.dirty) then
    redis.call('PUBLISH', CHANNEL, cjson.encode({n = NAME, s = s.state, m = s.mode,
      v = s.version, r = remaining(s), o = s.opens, w = s.reason, d = s.detail, f = s.failure}))
  end
  local lease = 0
  if s.state == 'HALF_OPEN' then lease = math.max(0, s.lease_until - NOW) end
  return {admission, s.state, s.mode, s.version, remaining(s), s.opens, s.reason, s.fails, lease,
    s.fresh and 1 or 0, s.ticket, s.probes, s.detail, s.failure}
end

local ADMIT, PROBE, REJECT = 0, 1, 2

-- Fleet quorum (stores/quorum.py). Fields `vote:<instance>` = '<ms>:<version>' (the instance's
-- own policy tripped in closed round <version>) and `seen:<instance>` = ms of its last activity.
-- Count the votes of the current closed round and the instances active within the window;
-- delete entries that fell out of it.
local function fleet(s, window_ms)
  local all = redis.call('HGETALL', KEY)
  local since, voters, active, stale = NOW - window_ms, 0, 0, {}
  for i = 1, #all, 2 do
    local field, value = all[i], all[i + 1]
    local kind = string.sub(field, 1, 5)
    if kind == 'vote:' then
      local at, version = string.match(value, '^(%d+):(%d+)$')
      if at and tonumber(at) >= since and tonumber(version) == s.version then
        voters = voters + 1
      else
        stale[#stale + 1] = field
      end
    elseif kind == 'seen:' then
      if tonumber(value) >= since then active = active + 1 else stale[#stale + 1] = field end
    end
  end
  if #stale > 0 then redis.call('HDEL', KEY, unpack(stale)) end
  return voters, active
end

local function quorum_met(count, active, reporters, fraction)
  return count >= reporters and count >= fraction * active
end

local function seen_now(instance)
  redis.call('HSET', KEY, 'seen:' .. instance, num(NOW))
end

-- Instances in a run of failures: `run_by` is a comma-separated list.
local function run_size(run_by)
  if run_by == '' then return 0 end
  local n = 1
  for _ in string.gmatch(run_by, ',') do n = n + 1 end
  return n
end

local function run_add(run_by, instance)
  for id in string.gmatch(run_by, '[^,]+') do
    if id == instance then return run_by end
  end
  if run_by == '' then return instance end
  return run_by .. ',' .. instance
end
