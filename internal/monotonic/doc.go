// Package monotonic reads the clock probe events carry.
package monotonic
