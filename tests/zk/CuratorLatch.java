// A Curator LeaderLatch participant for the interoperability tests (tests/harness/curator.rs, CuratorLatch).
// Run with the JDK's single-file source launcher:
//   java -cp CLASSPATH tests/zk/CuratorLatch.java CONNECT PATH ID [NAME:PASSWORD]
// CONNECT is host:port (a zk:// prefix is dropped). With NAME:PASSWORD the client authenticates
// with the digest scheme and creates its nodes with all rights for itself and read for anyone
// (the ACL leader-exec gives its nodes when it has credentials). Prints one line per event, flushed: `started`,
// `leader` (LeaderLatchListener.isLeader), `notleader` (notLeader). Each `participants` line read
// from stdin is answered with `participants ID1,ID2,...` (LeaderLatch.getParticipants(), in order)
// and `leaderid ID` (LeaderLatch.getLeader().getId()). Closes the latch and the client, and exits,
// when stdin reaches EOF.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.curator.framework.api.ACLProvider;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.ACL;

public class CuratorLatch {
    static synchronized void say(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3 && args.length != 4) {
            System.err.println("usage: CuratorLatch CONNECT PATH ID [NAME:PASSWORD]");
            System.exit(2);
        }
        String connect = args[0].startsWith("zk://") ? args[0].substring(5) : args[0];
        String path = args[1];
        String id = args[2];

        CuratorFrameworkFactory.Builder builder = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(3000)
                .connectionTimeoutMs(3000)
                .retryPolicy(new ExponentialBackoffRetry(100, 10));
        if (args.length == 4) {
            List<ACL> acl = new ArrayList<>(ZooDefs.Ids.CREATOR_ALL_ACL);
            acl.addAll(ZooDefs.Ids.READ_ACL_UNSAFE);
            builder = builder
                    .authorization("digest", args[3].getBytes(StandardCharsets.UTF_8))
                    .aclProvider(new ACLProvider() {
                        @Override
                        public List<ACL> getDefaultAcl() {
                            return acl;
                        }

                        @Override
                        public List<ACL> getAclForPath(String path) {
                            return acl;
                        }
                    });
        }
        CuratorFramework client = builder.build();
        client.start();
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                say("leader");
            }

            @Override
            public void notLeader() {
                say("notleader");
            }
        });
        latch.start();
        say("started");

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (!line.trim().equals("participants")) {
                continue;
            }
            try {
                List<String> ids = new ArrayList<>();
                for (Participant participant : latch.getParticipants()) {
                    ids.add(participant.getId());
                }
                say("participants " + String.join(",", ids));
                say("leaderid " + latch.getLeader().getId());
            } catch (Exception e) {
                say("error " + e);
            }
        }
        latch.close();
        client.close();
    }
}
