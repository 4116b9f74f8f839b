-- An output must be computed: an input as it is is not one.
local x = input("x", f32, { 3 })
output("y", x)
