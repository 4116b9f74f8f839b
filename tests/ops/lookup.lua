-- Embedding lookups that an elementwise loop reads itself (CUDA, OpenCL):
-- two lookups of one table through ids of their own, a table also read
-- element by element in the same loop, and a table computed in the run,
-- whose slot the loop's output must not take (its rows are read by all).
local B = dim("B", 3)
local T = dim("T", 7)
local a = input("a", i32, { B, T })
local b = input("b", i32, { B, T })
local w = param("w", { 11, 16 })
output("two", embedding(a, w) + embedding(b, w) * 2)
local r = input("r", i32, { 13 })
local s = param("s", { 13, 13 })
output("plain", embedding(r, s) + s)
local x = input("x", f32, { 13, 13 })
output("computed", softmax(embedding(r, x * 2) + 1))
