// Package ptrace holds a process's threads under ptrace(2) so that kprofd
// can stop one of them at a moment its probes choose, without the process
// or its parent noticing.
//
// A probe program stops a thread by sending it a signal (bpf_send_signal_
// thread) and recording the thread in a map; the signal makes a traced
// thread enter a signal-delivery-stop, which only the tracer sees. The
// Tracer asks Claim whether such a stop is one a probe asked for: if so it
// calls Pause, which returns when the thread may go on, and resumes the
// thread with the signal suppressed; any other signal is passed on to the
// thread as if nobody traced it. Threads the process creates are traced
// from their start (PTRACE_O_TRACECLONE); a job-control stop stays a stop
// (PTRACE_LISTEN).
//
// PTRACE_SEIZE, unlike PTRACE_ATTACH, stops nothing when it attaches, and
// a seized thread that calls execve gets no extra SIGTRAP. Every ptrace
// request must come from the thread that attached, so a Tracer runs on a
// goroutine locked to its OS thread; that thread ends with the Tracer, and
// the kernel detaches whatever is still traced when it does.
package ptrace
