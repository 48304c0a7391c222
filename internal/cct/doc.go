// Package cct holds the calling-context tree and the profile it belongs to, the
// hand-off between the daemon and the exporters.
package cct
