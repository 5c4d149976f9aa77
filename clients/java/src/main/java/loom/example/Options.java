package loom.example;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * The example's command line: {@code [TARGET] [--ca FILE] [--service-config FILE |
 * --no-service-config] [--timeout SECONDS] [--watch INBOX]}, and the bearer token from
 * {@code $LOOM_TOKEN}.
 *
 * @param target the server, {@code host:port} or a gRPC target URI
 * @param ca PEM CA of the server's certificate (connect with TLS), or null for plaintext
 * @param serviceConfig the gRPC service config to load, or null for none
 * @param timeout the deadline of each call
 * @param token the bearer token, or null to send none
 * @param watch the inbox to follow with WatchInbox instead of weaving, or null
 */
record Options(
    String target, Path ca, Path serviceConfig, Duration timeout, String token, String watch) {

  static final String USAGE =
      "usage: java -jar target/loom-client.jar [TARGET] [--ca FILE] [--service-config FILE |"
          + " --no-service-config] [--timeout SECONDS] [--watch INBOX]\n"
          + "  TARGET              Loom server, host:port (default 127.0.0.1:50051)\n"
          + "  --ca FILE           PEM CA of the server's certificate: connect with TLS\n"
          + "  --service-config F  gRPC service config (default clients/service_config.json,\n"
          + "                      found from the current directory up)\n"
          + "  --no-service-config no timeouts, retries or wait-for-ready from a config: an\n"
          + "                      unreachable server fails at once as UNAVAILABLE\n"
          + "  --timeout SECONDS   deadline of each call (default 10)\n"
          + "  --watch INBOX       list INBOX, then print every change to it until interrupted,\n"
          + "                      resuming the stream with its last token\n"
          + "  $LOOM_TOKEN         bearer token sent as `authorization: Bearer <token>`";

  /** A command line that cannot be run; its message says why. */
  static final class UsageException extends Exception {
    UsageException(String message) {
      super(message);
    }
  }

  static Options parse(String[] args, String token) throws UsageException {
    String target = "127.0.0.1:50051";
    Path ca = null;
    Path serviceConfig = null;
    boolean useServiceConfig = true;
    Duration timeout = Duration.ofSeconds(10);
    boolean targetSeen = false;
    String watch = null;
    for (int i = 0; i < args.length; i++) {
      String arg = args[i];
      switch (arg) {
        case "--ca" -> ca = existing(arg, value(args, ++i, arg));
        case "--service-config" -> serviceConfig = existing(arg, value(args, ++i, arg));
        case "--no-service-config" -> useServiceConfig = false;
        case "--timeout" -> timeout = seconds(value(args, ++i, arg));
        case "--watch" -> watch = value(args, ++i, arg);
        case "-h", "--help" -> throw new UsageException("");
        default -> {
          if (arg.startsWith("-") || targetSeen) {
            throw new UsageException("unexpected argument " + arg);
          }
          target = arg;
          targetSeen = true;
        }
      }
    }
    if (!useServiceConfig) {
      serviceConfig = null;
    } else if (serviceConfig == null) {
      serviceConfig = findServiceConfig();
    }
    String bearer = token == null || token.isBlank() ? null : token.strip();
    return new Options(target, ca, serviceConfig, timeout, bearer, watch);
  }

  private static String value(String[] args, int i, String flag) throws UsageException {
    if (i >= args.length) {
      throw new UsageException(flag + " needs a value");
    }
    return args[i];
  }

  private static Path existing(String flag, String value) throws UsageException {
    Path path = Path.of(value);
    if (!Files.isReadable(path)) {
      throw new UsageException(flag + " " + value + ": no such readable file");
    }
    return path;
  }

  private static Duration seconds(String value) throws UsageException {
    try {
      double seconds = Double.parseDouble(value);
      if (seconds > 0 && seconds <= 86_400) {
        return Duration.ofMillis(Math.round(seconds * 1000));
      }
    } catch (NumberFormatException e) {
      // reported below
    }
    throw new UsageException("--timeout " + value + ": want seconds, more than 0");
  }

  /** clients/service_config.json in the current directory or the nearest parent holding it. */
  private static Path findServiceConfig() throws UsageException {
    Path relative = Path.of("clients", "service_config.json");
    for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
      if (Files.isReadable(dir.resolve(relative))) {
        return dir.resolve(relative);
      }
    }
    throw new UsageException(
        relative + " not found from the current directory up: run inside the repository, or"
            + " pass --service-config FILE or --no-service-config");
  }
}
