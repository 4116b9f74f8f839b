-- There is no f64: the global is nil.
local x = input("x", f64, { 3 })
output("y", relu(x))
