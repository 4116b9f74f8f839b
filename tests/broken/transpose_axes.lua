-- A rank-3 tensor has no axis 4.
local x = input("x", f32, { 2, 3, 5 })
output("y", transpose(x, 1, 4))
