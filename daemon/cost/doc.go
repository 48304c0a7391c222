// Package cost is hybrid mode's cost model: it predicts what each
// function's probes cost per call (from the calibrated probe classes)
// and, from the live call rates and the samples that land in the
// probes, decides round by round which functions to demote, leaves
// first, from full instrumentation to the entry probe only or to
// sampling, until the predicted overhead fits the budget. It also keeps
// the memory of a session's demotions for the next session of the same
// program and roots. It attaches nothing: package hybrid carries its
// decisions out. See docs/hybrid.md.
package cost
