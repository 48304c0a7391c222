package calibrate

// Implemented in targets_amd64.s.

func calPush()
func calPushU()
func calStep()
func calStepU()
func calNop5()
func calNop5U()
func calCatch()
func calCall()
func calStepTwin()

func loopPush(n int)
func loopPushU(n int)
func loopStep(n int)
func loopStepU(n int)
func loopNop5(n int)
func loopNop5U(n int)
func loopCatch(n int)
func loopCall(n int)
func loopStepTwin(n int)

func targetAddrs(a *[numAddrs]uintptr)

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
	addrCalPushU
	addrCalStepU
	addrCalNop5U
	addrLoopPushU
	addrLoopStepU
	addrLoopNop5U
	addrCalCall
	addrLoopCall
	numAddrs
)
