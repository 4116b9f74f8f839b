-- h0 is [layers * directions, batch, hidden]: a bidirectional GRU needs 2 states, not 1.
local x = input("x", f32, { 4, 2, 3 })
local h0 = input("h0", f32, { 1, 2, 6 })
output("y", gru(x, 6, param("gru"), { bidirectional = true, h0 = h0 }))
