// Package commentary words what a profile says of itself: the headline
// that goes in the pprof file's comments, and the report beside it with
// the details. It is a function of plain facts (Facts), which the session
// gathers once it has stopped, so that what a person reads is tested
// without a target.
package commentary
