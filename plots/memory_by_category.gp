# (a) Memory by category per configuration: one horizontal stacked bar per configuration, so every
# label reads straight. Each category is drawn at its own peak over the timed steps (the CSV's *_bytes
# columns), so a bar can be longer than the peak allocated, the black dot: the difference was never
# live at the same moment. A configuration that ran out of memory has no bar, and says so in red.
load scriptdir."/common.gp"
if (!exists("n_mem")) n_mem = 1
if (!exists("subtitle")) subtitle = ""
f = data("memory_by_category.dat")
array cname[6] = ["parameters", "gradients", "optimizer (Adam m, v)", "master weights", "activations", "workspace"]
array ccol[6]
ccol[1] = c_param; ccol[2] = c_grad; ccol[3] = c_optim; ccol[4] = c_master; ccol[5] = c_act; ccol[6] = c_ws
cum(n) = n < 2 ? 0 : sum [k=2:n] column(k)
height = n_mem > 14 ? 160 + 24 * n_mem : height
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("memory_by_category", fmt)
    set title "Device memory by category per configuration (each category at its own peak)\n".subtitle
    if (n_mem == 0) {
        eval(empty_panel("no trained or out-of-memory rows in this CSV"))
    } else {
        set xlabel "GiB" offset 0,0.6
        set xrange [0:*]
        set yrange [n_mem - 0.5:-0.5]
        set ytics noenhanced font ",10"
        set grid xtics noytics lc rgb '#d8d8d8'
        set key below horizontal maxrows 2
        plot for [c=2:7] f using ((cum(c - 1) + cum(c)) / 2):0:(column(c) / 2):(0.38):ytic(1) with boxxyerror \
                 fs solid 0.85 border rgb '#404040' lc rgb ccol[c - 1] title cname[c - 1], \
             '' using 8:0 with points pt 7 ps 1.1 lc rgb "black" title "peak allocated", \
             '' using (0):0:($9 == 1 ? sprintf(" out of memory under the cap %s", strcol(10)) : "") with labels left \
                 textcolor rgb "#d62728" font ",10" notitle
    }
    set output
}
