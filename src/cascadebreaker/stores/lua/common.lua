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
  'detail', 'failure'}
local TEXT = {state = true, mode = true, reason = true, detail = true, failure = true}

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
  s.fails = 0
  start_round(s)
  move(s, 'OPEN', why, detail)
end

local function close(s, why, detail)
  s.opens, s.fails = 0, 0
  start_round(s)
  move(s, 'CLOSED', why, detail)
end

local function half_open(s)
  s.half_since = NOW
  start_round(s)
  move(s, 'HALF_OPEN', 'open_wait_over')
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
