-- Axis 2 has 8 elements; 9 is past the end.
local x = input("x", f32, { 3, 8 })
output("y", slice(x, 2, 1, 9))
