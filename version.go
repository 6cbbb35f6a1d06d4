package weir

// Version is the release of weir this source is, without the "v" of its tag.
// The client registry and `weir version` report it.
const Version = "0.1.0"
