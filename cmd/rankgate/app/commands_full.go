//go:build !rankgate_node

package app

import "github.com/spf13/cobra"

// The build flavour, as `rankgate version` names it.
const (
	buildFlavour     = "full"
	buildFlavourText = "full (every command)"
)

// commands are the full build's: the node faces and the cluster faces
// (diagnose, status, controller), which link client-go.
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
		a.newStatusCommand(),
		a.newVersionCommand(),
	}
}
