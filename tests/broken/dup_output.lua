-- Two outputs with the same name.
local x = input("x", f32, { 3 })
output("y", relu(x))
output("y", tanh(x))
