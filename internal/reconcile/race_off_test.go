//go:build !race

package reconcile

const raceDetector = false
