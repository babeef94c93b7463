-- Admission for one tenant, atomic across replicas (the same book as store/limits.rs).
-- KEYS[1]: the tenant's in-flight leases (sorted set: member -> expiry, server seconds)
-- KEYS[2]: the tenant's token bucket (hash: available, at, limit)
-- ARGV: cap, tokens_per_minute, tokens, lease member, lease ttl (seconds)
-- Returns {0, 0} admitted, {1, cap} too many in flight, {2, retry secs} tokens used up,
-- {3, limit} larger than the whole limit.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local cap, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local ttl = tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if cap > 0 and redis.call('ZCARD', KEYS[1]) >= cap then
  return {1, cap}
end
if tpm > 0 then
  if tokens > tpm then
    return {3, tpm}
  end
  local b = redis.call('HMGET', KEYS[2], 'available', 'at', 'limit')
  local avail, at, limit = tonumber(b[1]), tonumber(b[2]), tonumber(b[3])
  if avail == nil then
    avail, at, limit = tpm, now, tpm
  end
  if limit ~= tpm then
    avail = math.min(avail, tpm)
    if limit == 0 then avail = tpm end
  end
  avail = math.min(avail + math.max(now - at, 0) * tpm / 60, tpm)
  local missing = tokens - avail
  if missing > 0 then
    return {2, math.max(math.ceil(missing / (tpm / 60)), 1)}
  end
  redis.call('HSET', KEYS[2], 'available', string.format('%.6f', avail - tokens),
    'at', string.format('%.6f', now), 'limit', tpm)
  redis.call('EXPIRE', KEYS[2], 120)
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[4])
redis.call('EXPIRE', KEYS[1], math.ceil(ttl) * 2)
return {0, 0}
