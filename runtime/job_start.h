// The start of an MPI job's work. Under mpirun every process checks the same command line
// before any work, but a check that reads the host (an output folder, a --config file) can
// fail on some processes only. So every process passes the start once, before it prints or
// runs anything: with the usage error it met (start_job), or with none (begin_work). There,
// in one collective right after MPI_Init, the processes learn which of them met an error, so
// that the job prints one line and every process exits 2. A process's first MPI World passes
// the start with no error if the program did not.
//
// The processes also compare their configurations there (set_job_config): every process of
// a job must run the same command with the same settings and world shape, so a difference
// (another --seed, --threads-per-process, or --report on one process only) is a usage error
// that every process meets, naming the setting and both values.
//
// Implemented by the MPI plug-in (transport/mpi/job_start.cc), the one transport whose
// processes are started apart; without mpirun every call returns at once.
//
// Thread safety: start_job, begin_work and job_started are safe from any thread (the first
// call to pass the start decides it); JobStart is a value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/types.h"

namespace dtsim {

// How long the processes wait for each other at the start, MPI_Init included.
inline constexpr std::chrono::seconds kStartDeadline{30};

// What the processes of the job met before their work.
struct JobStart {
  // False: not every process reached the start within kStartDeadline (one ended before it,
  // is stuck, or runs another program); `errors` then holds this process's error only.
  bool agreed = true;
  int process = 0;  // this process's index (MPI_COMM_WORLD rank)
  // Per process: 0 if it met no usage error, else a hash of its error's text (never 0).
  std::vector<uint64_t> errors;
  // Per process: its set_job_config() text ("" if none; only this process's if !agreed).
  std::vector<std::string> configs;

  // The lowest-numbered process that met an error, or -1.
  int first_failed() const;
};

// Thrown where a process that met no error learns that another did (that one reports it);
// the program ends with exit code 2, printing nothing more.
struct JobRefused : UsageError {
  using UsageError::UsageError;
};

// Sets the configuration this process brings to the start: one "setting value" line per
// setting, in the same order in every process. Call before start_job / begin_work.
void set_job_config(std::string text);

// The first line where `other`'s configuration differs from `mine`, as a usage error's text
// "process P has `line`, process 0 has `line`", or "" if they agree.
std::string config_difference(const std::string& mine, int mine_process, const std::string& other,
                              int other_process);

// Passes the start with `error`, the one-line usage error this process met ("" if none).
// Under mpirun with several processes it starts MPI and waits (up to kStartDeadline) for
// every process to pass; otherwise it returns at once. Later calls return the first outcome.
// `error_alone` is what this process prints (to stderr, then exiting 2) if mpirun's SIGTERM
// ends the job before the processes agreed (a process ended before its start).
JobStart start_job(const std::string& error, const std::string& error_alone = "");

// start_job("") for a process about to work: returns when every process of the job may
// start; throws JobRefused when another met a usage error, UsageError when the processes'
// configurations differ, Error when they did not agree.
void begin_work();

// Whether this process has passed the start.
bool job_started();

}  // namespace dtsim
