package basic

// SetRoundHook installs a function that sees every reweighting round of
// every fit (tests only; not concurrency-safe across fits).
func SetRoundHook(f func(round int, change float64, iters int)) { roundHook = f }

// SetStallCheck turns the early stop of stagnating fits on or off (tests
// only) and returns the previous setting.
func SetStallCheck(on bool) bool { old := stallCheck; stallCheck = on; return old }
