// Starts DynamoDB Local bound to one address (default 127.0.0.1) instead of all interfaces:
// DynamoDB Local's own ServerRunner has no host option, and a test database should not be
// reachable from the network. Same command-line flags as ServerRunner; the bind address comes
// from -Dloom.dynamodb.host. Compiled once by scripts/engines/dynamodb.sh into the cache.
import com.amazonaws.services.dynamodbv2.local.main.ServerRunner;
import com.amazonaws.services.dynamodbv2.local.server.DynamoDBProxyServer;
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class LoopbackServerRunner {
  public static void main(String[] args) throws Exception {
    String host = System.getProperty("loom.dynamodb.host", "127.0.0.1");
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    Field field = DynamoDBProxyServer.class.getDeclaredField("server");
    field.setAccessible(true);
    Server jetty = (Server) field.get(proxy);
    for (Connector connector : jetty.getConnectors()) {
      ((ServerConnector) connector).setHost(host);
    }
    proxy.start();
    System.out.println("DynamoDB Local listening on " + host);
    proxy.join();
  }
}
