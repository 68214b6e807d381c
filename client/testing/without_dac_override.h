#ifndef SUMMON_CLIENT_TESTING_WITHOUT_DAC_OVERRIDE_H_
#define SUMMON_CLIENT_TESTING_WITHOUT_DAC_OVERRIDE_H_

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <utility>

namespace summon::client::testing {

// Runs `body` on this thread with CAP_DAC_OVERRIDE set aside, then restores
// it. Root writes into a read-only directory through that capability, so a
// test of "cannot write here" needs it set aside to run as root (CI) as it
// runs for any other user. Capabilities are per thread: `body` must do its
// file work on the calling thread. Aborts if the capability cannot be set or
// restored (a test must not go on with the wrong privileges).
template <typename Body>
auto WithoutDacOverride(Body&& body) {
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, caps) != 0) std::abort();
  const __u32 effective = caps[0].effective;
  caps[0].effective &= ~(1u << CAP_DAC_OVERRIDE);
  if (::syscall(SYS_capset, &header, caps) != 0) std::abort();
  auto result = std::forward<Body>(body)();
  caps[0].effective = effective;
  if (::syscall(SYS_capset, &header, caps) != 0) std::abort();
  return result;
}

}  // namespace summon::client::testing

#endif  // SUMMON_CLIENT_TESTING_WITHOUT_DAC_OVERRIDE_H_
