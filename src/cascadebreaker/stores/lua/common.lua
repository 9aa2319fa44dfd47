-- Shared prelude, prepended to every cascadebreaker script.
-- KEYS[1] = breaker hash; ARGV[1] = breaker name, ARGV[2] = namespace channel, ARGV[3] = key TTL ms.
-- Times are Redis server milliseconds (TIME), so hosts with skewed clocks agree.
if redis.replicate_commands then redis.replicate_commands() end
local KEY, NAME, CHANNEL, TTL = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local T = redis.call('TIME')
local NOW = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000)

local function num(x) return string.format('%.0f', x) end

local function load()
  local f = redis.call('HMGET', KEY, 'state', 'mode', 'version', 'open_until', 'opens', 'reason',
    'fails', 'probes', 'probe_ok', 'half_since', 'lease_until')
  if not f[1] then
    -- A new (or lost) breaker starts at server-time-based version, so it outranks any version a
    -- process remembers from before Redis lost its data.
    return {state = 'CLOSED', mode = 'NORMAL', version = NOW, open_until = 0, opens = 0,
      reason = '', fails = 0, probes = 0, probe_ok = 0, half_since = 0, lease_until = 0,
      fresh = true, dirty = true}
  end
  return {state = f[1], mode = f[2], version = tonumber(f[3]), open_until = tonumber(f[4]),
    opens = tonumber(f[5]), reason = f[6], fails = tonumber(f[7]), probes = tonumber(f[8]),
    probe_ok = tonumber(f[9]), half_since = tonumber(f[10]), lease_until = tonumber(f[11]),
    fresh = false, dirty = false}
end

local function move(s, to, why)
  s.version = s.version + 1
  s.state = to
  s.reason = why
  s.dirty = true
  s.changed = true
end

local function open(s, wait_ms, why)
  s.opens = s.opens + 1
  s.open_until = NOW + wait_ms
  s.fails, s.probes, s.probe_ok = 0, 0, 0
  move(s, 'OPEN', why)
end

local function close(s, why)
  s.opens, s.fails, s.probes, s.probe_ok = 0, 0, 0, 0
  move(s, 'CLOSED', why)
end

local function half_open(s)
  s.half_since = NOW
  s.probes, s.probe_ok, s.lease_until = 0, 0, 0
  move(s, 'HALF_OPEN', 'open wait over')
end

local function remaining(s)
  if s.state == 'OPEN' then return math.max(0, s.open_until - NOW) end
  return 0
end

local function save(s)
  redis.call('HSET', KEY, 'state', s.state, 'mode', s.mode, 'version', num(s.version),
    'open_until', num(s.open_until), 'opens', num(s.opens), 'reason', s.reason,
    'fails', num(s.fails), 'probes', num(s.probes), 'probe_ok', num(s.probe_ok),
    'half_since', num(s.half_since), 'lease_until', num(s.lease_until))
  redis.call('PEXPIRE', KEY, TTL + remaining(s))  -- never expire an open circuit early
end

-- Save if needed, publish a state change, and answer with the state the caller adopts:
-- {admission, state, mode, version, remaining_ms, opens, reason, fails, lease_remaining_ms, fresh}
local function finish(s, admission)
  if s.dirty then save(s) end
  -- A change, or a key (re)created (expired, or lost by Redis): the fleet adopts its version.
  if s.changed or (s.fresh and s.dirty) then
    redis.call('PUBLISH', CHANNEL, cjson.encode({n = NAME, s = s.state, m = s.mode,
      v = s.version, r = remaining(s), o = s.opens, w = s.reason}))
  end
  local lease = 0
  if s.state == 'HALF_OPEN' then lease = math.max(0, s.lease_until - NOW) end
  return {admission, s.state, s.mode, s.version, remaining(s), s.opens, s.reason, s.fails, lease,
    s.fresh and 1 or 0}
end

local ADMIT, PROBE, REJECT = 0, 1, 2
