//go:build !rankgate_node

package app

import "github.com/spf13/cobra"

// commands are the full build's: the node faces and the cluster faces
// (diagnose, controller), which link client-go.
func (a *App) commands() []*cobra.Command {
	return []*cobra.Command{
		a.newPreflightCommand(),
		a.newInspectCommand(),
		a.newDemoCommand(),
		a.newLaunchCommand(),
		a.newInitCommand(),
		a.newCopyBinaryCommand(),
		a.newDiagnoseCommand(),
		a.newControllerCommand(),
	}
}
