-- fft2d is not an op of the language: calling it calls nil.
local x = input("x", f32, { 1, 3, 9, 9 })
output("y", fft2d(x, 8, param("fft")))
