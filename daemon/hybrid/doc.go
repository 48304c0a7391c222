// Package hybrid is hybrid mode's controller: the monitor, which reads
// the probes' call counters and the target's cpu-clock samples and
// demotes the functions whose probes cost more than the overhead budget
// allows (package cost decides which), and the burster, which brings the
// entry probes of the functions demoted to sampling back for short bursts
// whose calls package estimate scales into counts. It talks to the
// session through the narrow interfaces of env.go. See docs/hybrid.md.
package hybrid
