-- Each cache is one state: a second kv_cache of the same name is refused.
local T = dim("T", 8)
local S = dim("S", 16)
local k = input("k", f32, { 2, 3, T, 4 })
local a = kv_cache("cache.k", k, S)
output("y", kv_cache("cache.k", k, S))
