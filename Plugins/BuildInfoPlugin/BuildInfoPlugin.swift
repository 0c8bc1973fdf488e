import Foundation
import PackagePlugin

/// Gives the `BuildInfo` target the release's version and the commit it was built from, at every build, with plain
/// `swift build`: a prebuild command runs `scripts/build-info.sh`, which reads `VERSION` at the package root and
/// asks git for the checkout's commit, and writes `BuildInfo+Generated.swift` into this plugin's work directory
/// (only when its text changes, so an unchanged commit recompiles nothing).
@main
struct BuildInfoPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let root = context.package.directoryURL
        let output = context.pluginWorkDirectoryURL.appendingPathComponent("generated")
        return [
            .prebuildCommand(
                displayName: "BuildInfo: VERSION and the git commit",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [root.appendingPathComponent("scripts/build-info.sh").path, root.path, output.path],
                outputFilesDirectory: output)
        ]
    }
}
