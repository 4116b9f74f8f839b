-- A rank-2 tensor has no axis 3.
local x = input("x", f32, { 4, 9 })
output("y", softmax(x, 3))
