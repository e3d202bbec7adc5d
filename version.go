package gapless

// Version is the release of this module, as its tag names it (vX.Y.Z, semantic versioning of
// the root package's API; CHANGELOG.md says what each release changed). A service depends on a
// release with `go get github.com/gapless-dev/gapless@<Version>`; the binaries report it with
// `gapless version`.
const Version = "v0.1.0"
