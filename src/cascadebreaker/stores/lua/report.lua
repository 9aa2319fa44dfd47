-- Batched closed-path outcomes of one process for the fleet-wide consecutive-failure count.
-- ARGV[4] = failures before the batch's first success, ARGV[5] = 1 if the batch had a success,
-- ARGV[6] = failures after its last success, ARGV[7] = threshold, ARGV[8] = open wait ms,
-- ARGV[9] = the version the outcomes were seen under: outcomes from an older state are dropped,
-- ARGV[10] = the batch's last failure ('Type: message' or ''),
-- ARGV[11..14] = fleet quorum: instance id ('' = no quorum), reporters, fraction, window ms.
-- With a quorum the run opens the circuit only when its failures came from enough instances.
local lead, had_success, tail = tonumber(ARGV[4]), ARGV[5] == '1', tonumber(ARGV[6])
local threshold, wait_ms, seen = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local failure, instance, reporters = ARGV[10], ARGV[11], tonumber(ARGV[12])
local fraction, window_ms = tonumber(ARGV[13]), tonumber(ARGV[14])
local s = load()
if instance ~= '' then seen_now(instance) end
if threshold < 1 or s.mode ~= 'NORMAL' or s.state ~= 'CLOSED'
    or not (s.fresh or same_closed_round(s, seen)) then
  return finish(s, ADMIT)
end
local before, before_by = s.fails, s.run_by
s.fails = s.fails + lead
if instance ~= '' and lead > 0 then s.run_by = run_add(s.run_by, instance) end
if s.fails < threshold and had_success then
  s.fails = tail
  s.run_by = (tail > 0 and instance ~= '') and instance or ''
end
if s.fails ~= before or s.run_by ~= before_by then s.dirty = true end
local met = s.fails >= threshold
local detail = num(s.fails) .. ' consecutive failures across the fleet'
if met and instance ~= '' then
  local _, active = fleet(s, window_ms)
  local by = run_size(s.run_by)
  met = quorum_met(by, active, reporters, fraction)
  detail = detail .. ' (' .. num(by) .. ' instances)'
end
if met then
  if failure ~= '' then s.failure = failure end
  open(s, wait_ms, 'consecutive_failures', detail)
elseif before == 0 and s.fails > 0 then
  -- Tell the fleet a failure run started, so processes on the lock-free path report successes.
  redis.call('PUBLISH', CHANNEL, cjson.encode({n = NAME, c = s.fails}))
end
return finish(s, ADMIT)
