// Package procevents hears of every exec of the processes it watches from
// the kernel's process events connector (netlink, CN_IDX_PROC), which
// queues the event from inside execve, before the new program runs a
// single instruction: after Sync, an exec that happened before the call
// is never missed, however briefly the new program ran.
package procevents
