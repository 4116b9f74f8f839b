-- kv_cache's S is the keys after a call, which changes from call to call: a constant is refused.
local T = dim("T", 8)
local k = input("k", f32, { 2, 3, T, 4 })
output("y", kv_cache("cache.k", k, 16))
