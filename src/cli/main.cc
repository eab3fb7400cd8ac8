// kiln: compile and run diffusion models. See `kiln --help`.
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "kernels/cpu/bf16.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: a graph compiler and runtime for diffusion-model inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kiln " KILN_VERSION_STRING);
  kiln::cli::Handler show = kiln::cli::add_show_command(app);
  kiln::cli::Handler run = kiln::cli::add_run_command(app);
  kiln::cli::Handler bench = kiln::cli::add_bench_command(app);
  kiln::cli::Handler profile = kiln::cli::add_profile_command(app);
  kiln::cli::Handler compile = kiln::cli::add_compile_command(app);
  kiln::cli::Handler generate = kiln::cli::add_generate_command(app);
  kiln::cli::Handler serve = kiln::cli::add_serve_command(app);
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    known |= argc > 1 && sub->get_name() == argv[1];
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr,
                 "kiln: error: unknown command '%s' (commands: show, run, bench, profile, compile, generate, serve; "
                 "see kiln --help)\n",
                 argv[1]);
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kiln: error: %s\n", e.what());
    return 2;
  }
  kiln::Status status = kiln::check_bf16_gemm_setting();
  if (!status.ok()) {
    std::fprintf(stderr, "kiln: error: %s\n", status.message().c_str());
    return 2;
  }
  if (app.got_subcommand("show")) status = show();
  else if (app.got_subcommand("run")) status = run();
  else if (app.got_subcommand("bench")) status = bench();
  else if (app.got_subcommand("profile")) status = profile();
  else if (app.got_subcommand("compile")) status = compile();
  else if (app.got_subcommand("generate")) status = generate();
  else if (app.got_subcommand("serve")) status = serve();
  if (status.ok()) return 0;
  std::fprintf(stderr, "kiln: error: %s\n", status.message().c_str());
  return status.code() == kiln::StatusCode::kInternal ? 1 : 2;
}
