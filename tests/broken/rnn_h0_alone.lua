-- an LSTM's initial state is h0 and c0 together.
local x = input("x", f32, { 4, 2, 3 })
local h0 = input("h0", f32, { 2, 2, 6 })
output("y", lstm(x, 6, param("lstm"), { layers = 2, h0 = h0 }))
