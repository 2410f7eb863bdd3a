// Package docs holds rankgate's user and operator documentation (the
// Markdown files in this directory). It has no code: its tests check that
// the links between README.md and these pages resolve.
package docs
