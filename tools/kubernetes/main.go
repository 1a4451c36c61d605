// Command kubernetes is one multi-call binary holding kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kube-proxy and kubectl of the pinned k8s.io/kubernetes release, so the
// shared code links once (a cold build on 2 cores stays within CI's budget). It picks the
// component by the name it is called under (symlinks named after each), or by its first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as kube-apiserver's and kube-controller-manager's mains do

	"github.com/spf13/cobra"
	_ "k8s.io/client-go/plugin/pkg/client/auth" // kubectl's auth plugins, as its main does
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// servers maps each component name to the constructor its upstream main calls.
var servers = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
}

func main() {
	name := filepath.Base(os.Args[0])
	if name != "kubectl" && servers[name] == nil && len(os.Args) > 1 {
		// Called by its own name: the first argument names the component.
		name, os.Args = os.Args[1], os.Args[1:]
	}
	if name == "kubectl" {
		// As cmd/kubectl's main.
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	newCommand := servers[name]
	if newCommand == nil {
		fmt.Fprintf(os.Stderr, "unknown component %q: call this binary as (or with a first argument of) "+
			"kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy or kubectl\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
