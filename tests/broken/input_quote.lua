-- an input name with a quote, which a C string of the generated sources would end at
local x = input("x\"y", f32, { 2, 3 })
output("y", relu(x))
