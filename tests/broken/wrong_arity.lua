-- matmul takes two tensors.
local a = input("a", f32, { 5, 7 })
output("y", matmul(a))
