-- Softmax over the last axis and over a middle one.
local B = dim("B", 8)
local x = input("x", f32, { B, 17, 33 })
output("last", softmax(x))
output("middle", softmax(x, 2))
output("first", softmax(x * 2, 1))
