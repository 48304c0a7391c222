package calibrate

// Implemented in targets_amd64.s.

func calPush()
func calStep()
func calNop5()
func calCatch()

func loopPush(n int)
func loopStep(n int)
func loopNop5(n int)
func loopCatch(n int)

func targetAddrs(a *[8]uintptr)

// Indexes into targetAddrs's array.
const (
	addrCalPush = iota
	addrCalStep
	addrCalNop5
	addrCalCatch
	addrLoopPush
	addrLoopStep
	addrLoopNop5
	addrLoopCatch
)
