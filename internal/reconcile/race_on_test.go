//go:build race

package reconcile

// raceDetector: the race detector slows the virtual-time scale test about fivefold.
const raceDetector = true
