#include "server/model/data_dir_format.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "version.h"

namespace summon::server {
namespace {

constexpr char kFileName[] = "FORMAT";

// Written to a temporary file and renamed: a daemon killed meanwhile leaves
// either no FORMAT (adopted again next start) or a whole one.
absl::Status WriteFormat(const std::filesystem::path& path, int format) {
  const std::string temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << format << "\n";
    if (!out.flush()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write the data dir's format to ", temporary));
    }
  }
  if (rename(temporary.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", temporary,
                                               " to ", path.string(), ": ",
                                               strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDataDirFormat(const std::string& data_dir) {
  constexpr int understood = kDataDirFormat;
  const std::filesystem::path path =
      std::filesystem::path(data_dir) / kFileName;
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    if (error) {
      return absl::UnavailableError(absl::StrCat(
          "cannot look at ", path.string(), ": ", error.message()));
    }
    return WriteFormat(path, understood);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the data dir's format from ", path.string()));
  }
  int format = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &format) ||
      format < 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir, ": ", path.string(),
        " holds no format number (one line, e.g. \"", understood,
        "\"); it was damaged or not written by summond: restore the data "
        "dir from a backup, or remove the file if the data dir is one this "
        "release (summond ",
        kVersion, ", format ", understood, ") wrote"));
  }
  if (format > understood) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", data_dir, " has format ", format,
        ", written by a newer summond; this summond (", kVersion,
        ") understands formats up to ", understood,
        " and does not read it: run the newer release on this node again "
        "(a rolling update rolled back stops here), or start this release "
        "on a data dir it wrote (restore a backup, or move this one aside "
        "and create the models again)"));
  }
  // Older formats would be migrated here; format 1 is the first.
  return absl::OkStatus();
}

}  // namespace summon::server
