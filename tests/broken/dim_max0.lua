-- A dim needs a maximum of at least 1.
local B = dim("B", 0)
output("y", relu(input("x", f32, { B, 3 })))
