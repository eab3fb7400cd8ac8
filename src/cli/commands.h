// The `kiln` subcommands. Each registers its flags on the CLI11 app and
// returns its handler's Status; main() turns a failed Status into one error
// line and exit code 2 (bad input) or 1 (internal error).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "core/status.h"

namespace kiln::cli {

using Handler = std::function<Status()>;

Handler add_show_command(CLI::App& app);
Handler add_run_command(CLI::App& app);
Handler add_bench_command(CLI::App& app);
Handler add_profile_command(CLI::App& app);
Handler add_compile_command(CLI::App& app);
Handler add_generate_command(CLI::App& app);
Handler add_serve_command(CLI::App& app);

}  // namespace kiln::cli
