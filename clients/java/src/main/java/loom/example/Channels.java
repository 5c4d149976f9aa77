package loom.example;

import com.google.gson.Gson;
import com.google.gson.JsonParseException;
import com.google.gson.reflect.TypeToken;
import io.grpc.ChannelCredentials;
import io.grpc.CompositeChannelCredentials;
import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.TlsChannelCredentials;
import java.io.IOException;
import java.io.InputStream;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.util.Map;

/** The channel the example calls through: TLS or not, a bearer token, the service config. */
final class Channels {
  private Channels() {}

  /** A channel as {@code options} ask; an unreadable CA or service config is an IOException. */
  static ManagedChannel open(Options options) throws IOException {
    ChannelCredentials credentials = InsecureChannelCredentials.create();
    if (options.ca() != null) {
      checkCertificates(options.ca());
      credentials = TlsChannelCredentials.newBuilder().trustManager(options.ca().toFile()).build();
    }
    if (options.token() != null) {
      credentials =
          CompositeChannelCredentials.create(credentials, new BearerToken(options.token()));
    }
    ManagedChannelBuilder<?> builder = Grpc.newChannelBuilder(options.target(), credentials);
    if (options.serviceConfig() != null) {
      // Per-method timeouts, wait-for-ready and retries on UNAVAILABLE / RESOURCE_EXHAUSTED
      // for the methods whose repeat is harmless: the one config every Loom client loads.
      builder.defaultServiceConfig(serviceConfig(options.serviceConfig())).enableRetry();
    }
    return builder.build();
  }

  /** Fails with a clear message unless {@code ca} holds PEM certificates. */
  private static void checkCertificates(Path ca) throws IOException {
    try (InputStream in = Files.newInputStream(ca)) {
      if (CertificateFactory.getInstance("X.509").generateCertificates(in).isEmpty()) {
        throw new IOException("--ca " + ca + ": no PEM certificate in it");
      }
    } catch (CertificateException e) {
      throw new IOException("--ca " + ca + ": not a PEM certificate: " + Example.rootMessage(e), e);
    }
  }

  /**
   * The JSON service config as the map grpc-java takes. Gson reads every JSON number as a
   * Double, which is the type grpc-java expects for numbers in it.
   */
  static Map<String, ?> serviceConfig(Path path) throws IOException {
    try (Reader reader = Files.newBufferedReader(path, StandardCharsets.UTF_8)) {
      Map<String, Object> config =
          new Gson().fromJson(reader, new TypeToken<Map<String, Object>>() {}.getType());
      if (config == null) {
        throw new IOException("service config " + path + " is empty");
      }
      return config;
    } catch (JsonParseException e) {
      throw new IOException("service config " + path + ": " + Example.rootMessage(e), e);
    }
  }
}
