// gohot: testdata/hot's twin in Go, for kprofd's overhead benchmarks on
// a Go target (contexts keyed by goroutine): every call of main.root makes
// leaves calls of main.leaf, a function that starts with the stack check
// (its entry probe sits on the emulated jbe) and does next to nothing.
//
// Build (the benchmarks build it with the go tool into a temporary
// directory):
//
//	go build -o gohot .
//
// Protocol on stdin/stdout, as testdata/hot's: it prints "ready"; for each
// "run N" two goroutines, each locked to its own thread, call root N times
// and it prints "ns W C": the mean wall time and the mean thread CPU time
// per leaf call (over both, each timing itself). "exit" exits 0.
//
// The collector is off (nothing allocates while root runs anyway): its
// work would only add noise to the figures.
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"syscall"
	"unsafe"
)

const (
	workers = 2
	leaves  = 16
)

var sink int

// leaf's frame is too big for a frameless leaf, so it starts with the
// stack check like most Go functions.
//
//go:noinline
func leaf(x int) int {
	var a [32]int
	a[x&31] = x
	return a[(x+1)&31] + 2*x + 1
}

//go:noinline
func root(n int) int {
	s := 0
	for i := range n {
		s += leaf(i)
	}
	return s
}

// now reads clock (CLOCK_MONOTONIC 1, CLOCK_THREAD_CPUTIME_ID 3) in ns.
func now(clock uintptr) float64 {
	var ts syscall.Timespec
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clock, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec)*1e9 + float64(ts.Nsec)
}

// work calls root n times on a thread of its own and returns the wall
// and CPU time per leaf call.
func work(n int) (wall, cpu float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w0, c0 := now(1), now(3)
	s := 0
	for range n {
		s += root(leaves)
	}
	calls := float64(n) * leaves
	wall, cpu = (now(1)-w0)/calls, (now(3)-c0)/calls
	sink += s
	return wall, cpu
}

func main() {
	debug.SetGCPercent(-1)
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var n int
		if in.Text() == "exit" {
			os.Exit(0)
		}
		if _, err := fmt.Sscanf(in.Text(), "run %d", &n); err != nil {
			os.Exit(2)
		}
		var wg sync.WaitGroup
		var wall, cpu [workers]float64
		for i := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wall[i], cpu[i] = work(n)
			}()
		}
		wg.Wait()
		fmt.Printf("ns %.1f %.1f\n", (wall[0]+wall[1])/2, (cpu[0]+cpu[1])/2)
	}
	os.Exit(4)
}
