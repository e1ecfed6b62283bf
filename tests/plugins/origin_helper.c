/* The helper library a vendor's plugin ships beside itself
 * (origin_plugin.c): libvendor_origin_helper.so, found by the plugin's
 * RUNPATH $ORIGIN. It keeps a count the plugin adds to on each step, so a
 * run shows the helper's code, not a copy, ran. */
int accel_test_origin_count(int add);

static int g_total;

int accel_test_origin_count(int add) {
  g_total += add;
  return g_total;
}
