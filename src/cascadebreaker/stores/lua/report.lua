-- Batched closed-path outcomes of one process for the fleet-wide consecutive-failure count.
-- ARGV[4] = failures before the batch's first success, ARGV[5] = 1 if the batch had a success,
-- ARGV[6] = failures after its last success, ARGV[7] = threshold, ARGV[8] = open wait ms,
-- ARGV[9] = the version the outcomes were seen under: outcomes from an older state are dropped,
-- ARGV[10] = the batch's last failure ('Type: message' or '').
local lead, had_success, tail = tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6])
local threshold, wait_ms, seen = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local failure = ARGV[10]
local s = load()
if threshold < 1 or s.mode ~= 'NORMAL' or s.state ~= 'CLOSED'
    or not (s.fresh or s.version == seen) then
  return finish(s, ADMIT)
end
local before = s.fails
s.fails = s.fails + lead
if s.fails < threshold and had_success then s.fails = tail end
if s.fails ~= before then s.dirty = true end
if s.fails >= threshold then
  if failure ~= '' then s.failure = failure end
  open(s, wait_ms, 'consecutive_failures', num(s.fails) .. ' consecutive failures across the fleet')
elseif before == 0 and s.fails > 0 then
  -- Tell the fleet a failure run started, so processes on the lock-free path report successes.
  redis.call('PUBLISH', CHANNEL, cjson.encode({n = NAME, c = s.fails}))
end
return finish(s, ADMIT)
