// Package countcheck sets a profile's call counts against the truth that
// exact-mode profiles of the same deterministic work give, context by
// context, each weighed by its self time: how much of the time is in
// contexts whose count is exact or estimated closely enough (covered),
// and how much in contexts whose count comes within its claimed error of
// the truth (accurate).
package countcheck
