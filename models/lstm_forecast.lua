-- Time-series forecasting: a 2-layer LSTM reads a window of feature vectors
-- (batch first), a linear head turns the last layer's final hidden state
-- into the next `horizon` values of the target series. The LSTM's
-- parameters carry torch.nn.LSTM's names under "lstm" (lstm.weight_ih_l0
-- [4*hidden, features], ...), the head's nn.Linear's under "head", so the
-- state_dict of
--     class Forecast(nn.Module):
--         def __init__(s): super().__init__(); s.lstm = nn.LSTM(8, 64, 2, batch_first=True); s.head = nn.Linear(64, 4)
-- loads as it is. -D sizes shrink it for tests.

local cfg = config {
  batch = 64,       -- the most windows per call
  window = 48,      -- the most time steps per window
  features = 8,
  hidden = 64,
  layers = 2,
  horizon = 4,
}

local B = dim("B", cfg.batch)
local T = dim("T", cfg.window)
local x = input("window", f32, { B, T, cfg.features })

local _, h_n = lstm(x, cfg.hidden, param("lstm"), { layers = cfg.layers, batch_first = true })
local last = reshape(slice(h_n, 1, cfg.layers, cfg.layers), { B, cfg.hidden })   -- the top layer's state
local forecast = linear(last, cfg.horizon, param("head"))
output("forecast", forecast)

-- nnc --train: the mean squared error against the series' next values
if training then
  local err = forecast - input("target", f32, { B, cfg.horizon })
  output("loss", mean(mean(err * err, 2), 1))
end
