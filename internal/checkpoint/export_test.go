package checkpoint

// WithPageLimit caps the items per List page so tests can drive pagination on a small table.
func WithPageLimit(n int32) Option { return func(s *Store) { s.pageLimit = n } }
