// gotarget: a Go target whose call counts per calling context below
// main.work are fixed by its structure, for kprofd's Go tests. More
// goroutines than GOMAXPROCS run work, which yields (runtime.Gosched),
// recovers panics raised one and three calls down, and recurses deep
// enough to grow its goroutine's stack while work's frames are live;
// meanwhile a goroutine outside the root calls the same functions.
//
// Build (the tests build it with the go tool into a temporary directory):
//
//	go build -o gotarget .            (and -ldflags=-s -w for a stripped copy)
//
// Protocol on stdin/stdout: it prints "ready", then for each line
//
//	run N   8 goroutines call work N times each (i in [g*N, g*N+N));
//	        prints "done SUM"
//	hot N   one goroutine calls hotLoop(N) HotLoops times: N calls of the
//	        tiny hotLeaf each (the hybrid-mode target); prints "done SUM"
//	alloc N one goroutine calls allocWork N times (i in [0, N)), and
//	        newPoint outside the root after each; prints "done SUM"
//	park N  N goroutines call parked, which calls leaf and then blocks
//	        inside the root until "unpark"; prints "parked" once all
//	        are blocked
//	unpark  releases them (each calls leaf once more); prints "done"
//	        once they have returned
//	spin    a goroutine calls spinning, which calls leaf until "stop";
//	        prints "spinning" once it has
//	mark    prints "marked" with the number of spinning's calls of leaf
//	        so far
//	stop    stops spinning; prints "done K M": its calls of leaf, and
//	        how many of them returned after the last mark
//	exit    exits with status 3
//
// and at end of input exits with status 4.
//
// Per call work(i), with main.* frames only:
//
//	work -> mid -> leaf x3
//	work -> guarded -> mayPanic, which panics when i%4 == 0 and else
//	        calls leaf; guarded's deferred closure (guarded.func1)
//	        recovers: run by guarded's return, or by the panic (under
//	        mayPanic)
//	work -> deepPanic -> lvl1 -> lvl2 -> lvl3, which panics when
//	        i%3 == 0; deepPanic's deferred closure recovers (run under
//	        lvl3 by the panic)
//	work -> grow(40) -> grow(39) ... -> grow(0) when i%2 == 0
//	work -> pick, then an interface call: square.area for even i,
//	        circle.area for odd i
//	work -> apply, which calls the closure work made (work.func1)
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// Goroutines is how many goroutines call work in each run.
const Goroutines = 8

// GrowDepth is how deep grow recurses.
const GrowDepth = 40

//go:noinline
func leaf(x int) int { return x*3 + 1 }

//go:noinline
func mid(x int) int {
	s := 0
	for k := 0; k < 3; k++ {
		s += leaf(x + k)
	}
	return s
}

//go:noinline
func mayPanic(i int) int {
	if i%4 == 0 {
		panic("mayPanic")
	}
	return leaf(i)
}

//go:noinline
func guarded(i int) (r int) {
	defer func() {
		if recover() != nil {
			r = -1
		}
	}()
	return mayPanic(i)
}

//go:noinline
func lvl3(i int) int {
	if i%3 == 0 {
		panic("lvl3")
	}
	return i
}

//go:noinline
func lvl2(i int) int { return lvl3(i) + 1 }

//go:noinline
func lvl1(i int) int { return lvl2(i) + 1 }

//go:noinline
func deepPanic(i int) (r int) {
	defer func() {
		if recover() != nil {
			r = -2
		}
	}()
	return lvl1(i)
}

// grow recurses n deep with a frame of about 600 bytes: 40 deep outgrows
// a new goroutine's 8 KiB stack, so the runtime copies the stack while
// work's and grow's frames are on it.
//
//go:noinline
func grow(n int) int {
	var pad [64]int
	pad[n%64] = n
	if n == 0 {
		return pad[0]
	}
	return grow(n-1) + pad[n%64]
}

type shape interface{ area() int }

type square struct{ s int }

type circle struct{ r int }

//go:noinline
func (q square) area() int { return q.s * q.s }

//go:noinline
func (c circle) area() int { return 3 * c.r * c.r }

// pick returns a shape whose type the caller cannot know: the interface
// call on it goes through the itab.
//
//go:noinline
func pick(i int) shape {
	if i%2 == 0 {
		return square{i % 10}
	}
	return circle{i % 10}
}

//go:noinline
func apply(f func(int) int, x int) int { return f(x) }

//go:noinline
func work(i int) int {
	s := mid(i)
	s += pick(i).area()
	s += apply(func(x int) int { return x + i }, i)
	runtime.Gosched()
	s += guarded(i)
	s += deepPanic(i)
	if i%2 == 0 {
		s += grow(GrowDepth)
	}
	return s
}

// HotLoops is how many calls of hotLoop "hot" makes.
const HotLoops = 20

// hotLeaf is short, but long enough (some 40 multiply-adds) for the CPU
// samples of the hot loop to land in it rather than in its caller.
//
//go:noinline
func hotLeaf(x int) int {
	for k := 0; k < 40; k++ {
		x = x*31 + k
	}
	return x
}

//go:noinline
func hotLoop(n int) int {
	s := 0
	for k := 0; k < n; k++ {
		s += hotLeaf(k)
	}
	return s
}

func hot(n int) int64 {
	done := make(chan int64)
	go func() {
		var s int64
		for range HotLoops {
			s += int64(hotLoop(n))
		}
		done <- s
	}()
	return <-done
}

// point is 24 bytes without pointers: one mallocgc of 24 bytes per new.
type point struct{ x, y, z int64 }

// BufSize is the size of makeBuf's slices; a variable, so that make calls
// runtime.makeslice.
var BufSize = 1000

// The allocations escape here (one goroutine stores them).
var (
	keptPoint *point
	keptBuf   []byte
)

//go:noinline
func newPoint(i int) *point { return &point{int64(i), 1, 2} }

//go:noinline
func makeBuf(i int) []byte {
	b := make([]byte, BufSize)
	b[0] = byte(i)
	return b
}

//go:noinline
func pair(i int) int64 {
	p, q := newPoint(i), newPoint(i+1)
	keptPoint = q
	return p.x + q.x
}

// allocWork is the root of "alloc": per call one newPoint, one makeBuf
// and, for even i, a pair (two newPoints).
//
//go:noinline
func allocWork(i int) int64 {
	p := newPoint(i)
	keptPoint = p
	keptBuf = makeBuf(i)
	s := p.x + int64(keptBuf[0])
	if i%2 == 0 {
		s += pair(i)
	}
	return s
}

// allocs calls allocWork(i) for i in [0, n) on one goroutine, and a
// newPoint outside the root after each.
func allocs(n int) int64 {
	done := make(chan int64)
	go func() {
		var s int64
		for i := 0; i < n; i++ {
			s += allocWork(i)
			keptPoint = newPoint(-i)
		}
		done <- s
	}()
	return <-done
}

var (
	release  chan struct{}  // closed by "unpark"
	parkedWG sync.WaitGroup // the goroutines still inside parked
)

//go:noinline
func parked(i int, ready *sync.WaitGroup) int {
	s := leaf(i)
	ready.Done()
	<-release
	return s + leaf(i+1)
}

func park(n int) {
	release = make(chan struct{})
	var ready sync.WaitGroup
	for i := 0; i < n; i++ {
		ready.Add(1)
		parkedWG.Add(1)
		go func(i int) {
			defer parkedWG.Done()
			parked(i, &ready)
		}(i)
	}
	ready.Wait()
}

var (
	spinStop  atomic.Bool
	spinCalls atomic.Int64 // spinning's calls of leaf that returned
	spinMark  int64        // spinCalls at the last "mark"
	spinDone  chan struct{}
)

//go:noinline
func spinning() int {
	s := 0
	for !spinStop.Load() {
		s += leaf(s)
		spinCalls.Add(1)
	}
	return s
}

func spin() {
	spinStop.Store(false)
	spinCalls.Store(0)
	spinMark = 0
	spinDone = make(chan struct{})
	go func() {
		defer close(spinDone)
		spinning()
	}()
	for spinCalls.Load() == 0 {
		runtime.Gosched()
	}
}

func run(n int) int64 {
	var sum atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < Goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g * n; i < g*n+n; i++ {
				sum.Add(int64(work(i)))
			}
		}(g)
	}
	// The same functions, called outside the root: never counted.
	stop := make(chan struct{})
	outside := make(chan struct{})
	go func() {
		defer close(outside)
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			mid(k)
			grow(GrowDepth)
			runtime.Gosched()
		}
	}()
	wg.Wait()
	close(stop)
	<-outside
	return sum.Load()
}

func main() {
	runtime.GOMAXPROCS(2)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		line := in.Text()
		var n int
		if _, err := fmt.Sscanf(line, "run %d", &n); err == nil {
			fmt.Printf("done %d\n", run(n))
			continue
		}
		if _, err := fmt.Sscanf(line, "hot %d", &n); err == nil {
			fmt.Printf("done %d\n", hot(n))
			continue
		}
		if _, err := fmt.Sscanf(line, "alloc %d", &n); err == nil {
			fmt.Printf("done %d\n", allocs(n))
			continue
		}
		if _, err := fmt.Sscanf(line, "park %d", &n); err == nil {
			park(n)
			fmt.Println("parked")
			continue
		}
		if line == "unpark" {
			close(release)
			parkedWG.Wait()
			fmt.Println("done")
			continue
		}
		switch line {
		case "spin":
			spin()
			fmt.Println("spinning")
			continue
		case "mark":
			spinMark = spinCalls.Load()
			fmt.Printf("marked %d\n", spinMark)
			continue
		case "stop":
			spinStop.Store(true)
			<-spinDone
			k := spinCalls.Load()
			fmt.Printf("done %d %d\n", k, k-spinMark)
			continue
		}
		if strings.HasPrefix(line, "exit") {
			os.Exit(3)
		}
	}
	os.Exit(4)
}
