//go:build rankgate_node

package app

// buildFlagValues: the node build has no cluster commands.
func buildFlagValues() map[string][]string { return nil }
